"""One module per pane of the dashboard."""
