"""What changes the host ahead of a start: the model's weights read into the page cache (page_cache)."""
