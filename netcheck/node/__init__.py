"""The node side: websocket client, workers, labelled emulation and demo adversaries."""
