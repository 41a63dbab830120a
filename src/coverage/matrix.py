"""``transmuter coverage matrix``: the results as Markdown, a table of task x model x variant
(``pass``, ``differs (size)`` with the largest difference, ``error (type)``), then the list of
tested models with their downloads."""

from ..hub.variants import DTYPE_SUFFIXES
from . import cases


def matrix(folder):
    """The Markdown text of ``folder``/results.json (and cases.json for downloads)."""
    results = cases.read(folder, "results.json", "run")
    downloads = {(g["task"], g["repo"]): g.get("downloads", 0)
                 for g in cases.read(folder, "cases.json", "select")}
    order = list(DTYPE_SUFFIXES)
    variants = sorted({r["variant"] for r in results}, key=order.index)
    cells = {(r["task"], r["repo"], r["variant"]): cell(r) for r in results}
    rows = list(dict.fromkeys((r["task"], r["repo"]) for r in results))
    passed = sum(r["status"] == "pass" for r in results)
    models = f"{len(rows)} model{'' if len(rows) == 1 else 's'}"
    lines = [f"{passed} of {len(results)} cases pass ({models}).", "",
             "| task | model | " + " | ".join(variants) + " |",
             "| --- | --- | " + " | ".join("---" for _ in variants) + " |"]
    for task, repo in rows:
        lines.append(f"| {task} | {repo} | " +
                     " | ".join(cells.get((task, repo, v), "") for v in variants) + " |")
    lines += ["", "Tested models:", ""]
    for task, repo in rows:
        held = [v for v in variants if (task, repo, v) in cells]
        lines.append(f"- [{repo}](https://huggingface.co/{repo}) ({task}; "
                     f"{downloads.get((task, repo), 0):,} downloads; {', '.join(held)})")
    return "\n".join(lines) + "\n"


def cell(result):
    if result["status"] == "pass":
        return "pass"
    if result["status"] == "differs":
        return f"differs ({result['size']:.2g})"
    error = result["error"]  # "Type: message", or "record: Type: message"
    stage, _, rest = error.partition(": ") if error.startswith("record: ") else ("", "", error)
    kind = rest.split(":", 1)[0]
    return f"error ({stage + ': ' if stage else ''}{kind})"
