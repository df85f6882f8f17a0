"""Records and events -> the run model, as explicit tables; ``bind(source, run)`` wires a source
to a model (docs/architecture.md "The data path"). No Textual or Rich import."""
