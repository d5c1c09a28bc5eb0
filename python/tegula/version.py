"""The package's version, `tegula.__version__`: a module of its own, importing nothing, so
that the JIT's persistent index and the autotuner's cache (which key on it) read it
without importing the package's top (tegula/__init__.py), which imports the layers above
them."""

__version__ = "0.1.0"
