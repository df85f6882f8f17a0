"""bmoe_top.tui.widgets package."""
