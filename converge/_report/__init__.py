"""The HTML report of a stored run: one self-contained page, its SVG drawings and assets."""
