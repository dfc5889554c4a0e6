"""The Celery tasks, thin: each calls into `worker`."""
