"""bmoe_top.tui.screens package."""
