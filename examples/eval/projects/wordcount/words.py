"""Counting words: the eval demo's third project."""


def count_words(text):
    """How many words `text` holds, whatever the spaces between them."""
    return len(text.split(" "))
