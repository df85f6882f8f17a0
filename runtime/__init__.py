"""bmoe-run: the bundled expert-streaming runtime on llama.cpp."""
