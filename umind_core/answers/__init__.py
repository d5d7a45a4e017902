"""What an answer means: the grounding grammar that turns geometry into words and back (`grounding`), the finding
classes (`findings`), what is read off a mask (a lesion's `calipers`, an organ's `landmarks`, a head's ellipse),
and `Result`, the one answer type every layer speaks (`results`). No torch here: the server's edge, the CLI's
argument parsing and the Slicer-side copies rely on these rules loading fast."""
