"""bmoe-top: the Textual app, its sources and the run model."""
