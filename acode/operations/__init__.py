"""What a person does to sessions outside a run: inspect, export, decide an approval,
unlock, discard, mark."""
