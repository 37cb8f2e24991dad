"""ComputeEval datapacks evaluated by keval (``python -m keval.compute_eval --help``).

- ``datapack``: read (with ComputeEval's integrity checks) and write problems/solutions datapacks;
- ``pack``: datapacks from problem and solution directories (keval's test problems);
- ``passk``: pass@k and the performance summary, as ComputeEval computes them;
- ``evaluate``: the run, through a keval daemon's ``cuda_program`` kernel type.
"""
