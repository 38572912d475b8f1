"""The simulator's engines: each turns arrival times into batches (sizes, starts, ends)."""
