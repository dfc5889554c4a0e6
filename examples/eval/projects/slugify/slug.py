"""Slugs for titles: the eval demo's second project."""

import re


def slugify(title):
    """`title` as a lower-case slug: words joined by single hyphens."""
    words = re.findall(r"[A-Za-z0-9]+", title)
    return "-".join(words)
