"""Every text and JSON view of a run, as plain data: the run panel's rows, ``--summary``, every
``--once --json`` document; one number formatter and one JSON emitter (``numbers``). No Textual
or Rich import: the widgets style what these return."""
