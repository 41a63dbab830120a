"""The one padding policy: the few compiled shapes a batch is padded to.

A compiled graph is specialised to its input shapes, so each new shape costs a compile. Inputs are
padded up to a small set of sizes instead: row counts to powers of two, sequence lengths and
audio clips to a few steps per power of two (``octave_length``), or to the user's list of
buckets, image sides to multiples of a step. Every pipeline and the generation package take their
sizes from here, so the policy is written once.
"""

import functools
import math

from .errors import PipelineError

# Text pads a batch to the next of SEQUENCE_STEPS lengths per power of two above its longest row
# (at most 1/SEQUENCE_STEPS more), from MIN_SEQUENCE_LENGTH up: a handful of shapes per doubling of
# length. bench/text.py's 2,000 sentences at batch 32, sorted, pad to 1.25 / 1.14 / 1.10 times
# their tokens with 2 / 4 / 8 steps (10 / 17 / 32 shapes; the old (32, 128, 256): 1.76, 4 shapes);
# sentence-transformers, which sorts by characters and pads each batch to its longest row: 1.13.
SEQUENCE_STEPS = 4
MIN_SEQUENCE_LENGTH = 16
# Coarse buckets for graphs that compile dearly and run one input at a time (VITS).
DEFAULT_SEQUENCE_LENGTHS = (32, 128, 512)
# Compiled signatures a pipeline's model keeps (an LRU). Rows x lengths x segments of a graph
# that breaks (GLiNER breaks into ~8 segments per shape) fit with room to spare.
COMPILED_CACHE_SIZE = 128


def next_pow2(n):
    """The smallest power of two >= ``n`` (1 for 0 or 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def pow2_chunks(n):
    """``n`` as powers of two, largest first (100 -> [64, 32, 4])."""
    return [1 << b for b in reversed(range(int(n).bit_length())) if int(n) >> b & 1]


# What a decoder call on a prompt chunk costs beyond its rows, in rows: each call reads every
# weight once, the matrix-vector cost of a lone row. SmolVLM-256M's decoder (30 layers, 576 wide,
# 2 CPU cores): 1 row 37 ms, 16 rows 66, 64 rows 131, 128 rows 247 (~1.85 ms a row past 32): a call
# costs ~19 rows. Rows, not CALL_COST_WEIGHT_TOKENS' fixed overhead divided by the weights: reading
# the weights grows with them as each row's work does (that rule would give 135M weights 3 rows).
PROMPT_CALL_ROWS = 16


def prompt_chunks(n, call_rows=PROMPT_CALL_ROWS):
    """Chunk sizes that run an ``n``-token prompt into a KV buffer: powers of two, the last padded
    up to a power of two or 1.5 times one where that costs less (padded rows + ``call_rows`` a
    call) than cutting it further: 81 -> [96] (not 64 + 16 + 1), 37 -> [48], 520 -> [512, 8]."""
    n = int(n)
    whole = [octave_length(n, 2)]
    if whole == [n]:
        return whole
    top = 1 << (n.bit_length() - 1)  # the largest power of two below n
    cut = [top] + prompt_chunks(n - top, call_rows)
    return min(whole, cut, key=lambda plan: len(plan) * call_rows + sum(plan))  # a tie: whole


def pow2(n, cap, least=1):
    """The power of two >= ``n`` (at least ``least``), but never past max(n, cap): a batch of 5
    rows pads to 8, while 5 rows with ``cap`` 6 stay 6 (no shape above the batch size)."""
    return min(max(least, next_pow2(n)), max(n, cap))


def length(n, lengths):
    """The smallest bucket of ``lengths`` (sorted) that holds ``n``, else ``n`` itself."""
    return next((b for b in lengths if b >= n), n)


def lengths(given, cap, what="sequence_length"):
    """Sorted buckets from an int or a list of ints, each capped at ``cap``."""
    given = [given] if isinstance(given, int) else list(given)
    if not given or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in given):
        raise PipelineError(f"{what} must be a positive int or a list of them, got {given!r}")
    return tuple(sorted({min(b, cap) for b in given}))


def multiple(n, step):
    """``n`` rounded up to a multiple of ``step`` (image sides of graphs that take any size)."""
    return -(-int(n) // step) * step


def octave_length(n, per_octave=4):
    """``n`` rounded up to one of ``per_octave`` steps per power of two (``per_octave`` a power
    of two; 16,000 -> 16,384; 20,000 -> 20,480; 30,000 -> 32,768; 17 -> 20): at most
    1/``per_octave`` padding, and a few shapes per doubling of length, for graphs that take
    sequences or clips of any length with a mask."""
    n = max(int(n), 1)
    step = max(next_pow2(n) // (2 * per_octave), 1)
    return multiple(n, step)


# The Qwen2-VL vision encoder's patch rows (vlm_families.Qwen2VL): up to 1/PATCH_STEPS more. Its
# attention is dense over all patches, masked per image, so padding costs more than it saves
# sooner than text's does: 1/8 more rows is at most 1.27x the attention (4 steps: 1.56x).
PATCH_STEPS = 8


def patches(n, unit):
    """``n`` patch rows rounded up to one of PATCH_STEPS steps per power of two, and to a multiple
    of ``unit`` (the rows of one merged token): 100 -> 104, 132 -> 144, 3,888 -> 4,096 (unit 4)."""
    return multiple(octave_length(n, PATCH_STEPS), unit)


def octave_lengths(cap, per_octave=SEQUENCE_STEPS, least=MIN_SEQUENCE_LENGTH):
    """Every ``octave_length`` from ``least`` up to ``cap``, and ``cap`` itself: the default
    ``sequence_length`` buckets (cap 256, 4 steps: 16, 20, 24, 28, 32, 40, ..., 224, 256)."""
    out, n = [], min(int(least), int(cap))
    while n < cap:
        out.append(octave_length(n, per_octave))
        n = out[-1] + 1
    return tuple(sorted({min(b, cap) for b in out} | {int(cap)}))


# What a graph call costs beyond its padded tokens, in "weight x token" products: a call of
# all-MiniLM-L6-v2 (22.6M weights) costs ~10 ms of CPU before its tokens (1 x 1: 7-9 ms; each
# token ~0.52 ms in a batch; 2 loaded CPU cores, jaxlib 0.10), i.e. ~19 tokens x 22.6M. Divided by
# a model's weights it is the tokens a call must save to be worth making: ~19 for MiniLM, ~8,000
# for the tiny fixtures (52k weights), whose calls are all overhead and are never split.
CALL_COST_WEIGHT_TOKENS = 4.3e8

# A split also makes shapes that compile once each (seconds on CPU), so a call must save this
# fraction of a full batch at the largest length besides. On bench/text.py's 2,000 sorted
# sentences (all-MiniLM-L6-v2, batch 32) grouping with no such cost padded 1.122x the real tokens
# in 34 shapes, where full batches pad 1.144x in 17; with 1/16: 1.137x in 18. A server's unsorted
# batches of 64 requests (16-64 tokens) still split: 1.48x the real tokens in calls' cost (2.32x
# unsplit, 1.22x with no shape cost).
SPLIT_SHAPE_COST = 1 / 16


# Rent or buy a length bucket. A window's rows pad each to its own bucket, and each bucket a
# pipeline meets compiles once (~0.4-0.8 s on CPU): the acceptance row's 100 mixed sentences
# (bench/first_call.py --acceptance, all-MiniLM-L6-v2) met 14 buckets (16 to 160 tokens) and
# compiled 11 shapes, ~4.2 s of a 6.5 s first call.
# Instead a window's rows run at the lengths that cost least in padded tokens, a compile priced
# in tokens (below): a bucket this pipeline has not compiled pads to the shortest longer length
# it has or buys in the window (rents), or compiles (buys). Across windows and calls, the
# padding a bucket has cost is taken off its price, so a bucket compiles once its padding would
# reach a compile (the ski-rental rule: never more than twice the better of "always pad" and
# "always compile", whatever comes next: a notebook's one call, a service's short requests after
# a long one). Its shapes stay within the buckets, so a stream's shapes stay bounded. What a
# compile costs in padded tokens (bench/pad_or_compile.py; first call of a shape less a later
# one, cache off; 2 CPU cores): all-MiniLM-L6-v2 (488 nodes, 22.6M weights) 0.54-0.78 s a
# compile, 113-213 us a padded token: 3,650-4,730 tokens; the tiny bert fixtures (215 nodes, 52k
# weights) 0.55-0.60 s, 2.7-3.0 us: ~200,000 tokens. A token costs about its weights (as
# CALL_COST_WEIGHT_TOKENS has it) and a compile about the graph's nodes, so the estimate is nodes
# x this / weights: 3,900 tokens for MiniLM; 745,000 for the fixtures, whose tokens cost less
# than their weights say (their time is per-op overhead): they compile a new bucket later than
# they might. The acceptance row (--runs 3, load 1.0-1.3): 4 compiles instead of 11 (calls of
# 8x160, 8x96 and 4x96: 13,312 padded tokens for 8,079 real, 14,528 before); cold cache 6.88 ->
# 3.73 s (onnxruntime 4.98-5.15 s), warm 3.27 -> 2.71 s (PyTorch 4.56-4.70 s). Priced per
# bucket alone (each compiles when its own rows' padding reaches a compile), every row padded to
# 160 and the warm cache lost: 3.04 s. Only the default buckets coarsen: a ``sequence_length=``
# list is the user's choice of shapes (often a few coarse ones, where renting would pad 8x).
COMPILE_COST_NODE_WEIGHT_TOKENS = 1.8e8


def compile_tokens(nodes, weights):
    """What compiling a new length costs, in padded tokens of a graph of ``nodes`` nodes and
    ``weights`` weights (COMPILE_COST_NODE_WEIGHT_TOKENS)."""
    return COMPILE_COST_NODE_WEIGHT_TOKENS * max(int(nodes), 1) / max(int(weights), 1)


def pad_or_compile(sizes, compiled, waste, cost):
    """The length each of a window's padded ``sizes`` (buckets) runs at: its own where it is
    compiled (in ``compiled``) or bought in this window, else the shortest longer length
    compiled or bought (it rents). The window's plan is the one that costs least in padded
    tokens, a bucket's compile priced at ``cost`` less the padding it has already cost
    (``waste``: bucket -> tokens, rows x extra length, over earlier windows), so that across
    calls a bucket compiles once its padding would reach a compile (ski rental). Returns
    ({size: length}, the updated waste). Sizes [64] * 3 + [32] * 4 + [16] * 5, nothing
    compiled, a cost of 200: 64 compiles (nothing holds it), 32 compiles too and 16 pads to it
    (200 + 5 x 16 tokens, where padding both to 64 costs 4 x 32 + 5 x 48 = 368)."""
    counts = {}
    for size in sizes:
        counts[size] = counts.get(size, 0) + 1
    order = sorted(counts, reverse=True)

    @functools.lru_cache(maxsize=None)
    def plan(i, above):
        """(tokens, lengths) for order[i:], ``above`` the shortest length bought so far."""
        if i == len(order):
            return 0, ()
        size = order[i]
        held = min([n for n in compiled if n >= size] + [above])
        tokens, rest = plan(i + 1, size)  # it runs at its own length
        price = 0 if size == held else max(cost - waste.get(size, 0), 0)  # compiled: nothing
        best = (tokens + price, (size,) + rest)
        if held not in (size, math.inf):  # a longer length is there to rent
            tokens, rest = plan(i + 1, above)
            rent = (tokens + counts[size] * (held - size), (held,) + rest)
            best = min(best, rent, key=lambda option: option[0])
        return best

    runs = dict(zip(order, plan(0, math.inf)[1]))
    waste = dict(waste)
    for size, length in runs.items():
        if length != size:
            waste[size] = waste.get(size, 0) + counts[size] * (length - size)
    return runs, waste


# Streams. A call that fills its read-ahead window (an iterable, a list longer than a window)
# runs every call of its windows, and the rest after its last one, in ``batch_size`` rows
# (``least`` = cap): the shapes it meets are its length buckets alone, all met in its first
# windows, so after them it compiles nothing more and its compiled code (resident memory) stops
# growing. Rows padded to any power of two met a new (rows, length) pair now and then for as
# long as the stream ran (the figures, real all-MiniLM-L6-v2, batch 32, sentences of
# 3-120 words: 25 compiles after 3,000 inputs, 46 after 23,000; resident memory 752 -> 1,089
# MB). The cost is padding: bench/text.py's 2,000 sorted sentences pad to 1.144x their tokens in
# full batches (17 shapes), 1.137x in groups of any power of two (18 shapes, SPLIT_SHAPE_COST):
# under 1 % more work. A call on fewer inputs than a window keeps powers of two: it ends.
# pad_or_compile may compile a length a stream rented at first, later, once: its lengths stay
# its buckets.


def row_groups(sizes, cap, call_cost, least=1):
    """Graph calls for rows of padded ``sizes`` sorted largest first: (start, stop) ranges of at
    most ``cap`` rows, each padded to ``pow2`` rows (at least ``least``) of its first row's
    size, chosen to cost least (padded rows x size, plus ``call_cost`` a call). A batch of 32
    rows where 16 pad to 64 tokens and 16 to 16 costs 2,048 padded tokens as one call, 1,280 as
    two (16 x 64 and 16 x 16)."""
    n = len(sizes)
    if n == 0:
        return []
    if call_cost >= cap * sizes[0] or sizes[0] == sizes[-1]:  # no split can save a call's cost
        return [(s, min(s + cap, n)) for s in range(0, n, cap)]
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)  # best[j]: rows :j in calls
    for j in range(1, n + 1):
        for i in range(max(0, j - cap), j):
            cost = best[i] + call_cost + pow2(j - i, cap, least) * sizes[i]
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j:
        groups.append((cut[j], j))
        j = cut[j]
    return groups[::-1]
