"""Files as session state on a worker: working copies, sources, environments, the file walk."""
