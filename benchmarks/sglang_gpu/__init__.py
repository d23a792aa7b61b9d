"""SGLang 0.5.23's own Python on a CUDA GPU without its native packages: bundle, bootstrap, stubs, stand-ins."""
