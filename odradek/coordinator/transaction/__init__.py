"""The transaction coordinator (to come) and the producer ids it hands out."""
