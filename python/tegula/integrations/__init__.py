"""Tegula's kernels inside other libraries' models: `tegula.integrations.transformers.apply(model)`
patches a Hugging Face Llama-family model (transformers is an optional dependency:
`pip install tegula[transformers]`)."""
