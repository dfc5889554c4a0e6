"""Conformance kits run as a third party runs them: from outside tickwork."""
