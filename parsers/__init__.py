"""Pure, tolerant readers for every telemetry format (no Textual, no network, no threads)."""
