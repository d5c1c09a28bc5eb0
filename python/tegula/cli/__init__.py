"""The commands of `python -m tegula` (tegula/__main__.py) beside demo and info, one module
each with `add_arguments(parser)` and `run(args)`:

  layout.py  `python -m tegula layout`: a compiled kernel's buffer layout as a PNG
  bench.py   `python -m tegula bench`: the shipped kernels timed, on the roofline
  model.py   `python -m tegula model`: a Llama-style model eager and on Tegula's kernels

They sit at the top of the package: they drive the shipped kernels (tegula.kernels) and
the model integration with the tools below them, and nothing imports them but
tegula/__main__.py.
"""
