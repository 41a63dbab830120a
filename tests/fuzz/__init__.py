"""A fuzzer over the fixture graphs (`python -m tests.fuzz --seed 0 --count 1000`).

Cases are drawn from a seed: structural mutations of the ONNX graphs, byte flips, external-data
layouts, call-time inputs and repo files of pipelines, on JAX and MLX. Each runs in a worker
process with a time and a memory limit (pool.py); a case passes when Transmuter raises its own
error, or returns what onnxruntime returns on the same file and feed (judge.py). Replay one with
`python -m tests.fuzz --replay SEED:INDEX`.
"""
