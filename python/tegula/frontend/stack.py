"""The builders of the kernels being parsed now, innermost last (frontend/builder.py pushes
and pops them). A module of its own, importing nothing, so that the value types can ask
whether a kernel is being built without importing the builder that imports them."""

STACK: list = []
