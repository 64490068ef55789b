"""The Textual dashboard (imports textual; never torch)."""
