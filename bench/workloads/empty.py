"""Empty script: measures start-up and shutdown cost only."""
