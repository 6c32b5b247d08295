"""Where objects live: the SQLite store, watches, resource versions, selectors, encryption at
rest."""
