"""Coordinator: websocket endpoint, node registry, round planner and runner, admin API."""
