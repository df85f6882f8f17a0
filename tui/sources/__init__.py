"""bmoe_top.tui.sources package."""
