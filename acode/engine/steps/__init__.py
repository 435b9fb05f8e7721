"""Step kinds: what each kind does, and how resume treats it when it was interrupted."""
