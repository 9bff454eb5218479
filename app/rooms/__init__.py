"""Meetings in WebRTC rooms: the bot, admission, signaling, the mixer and the fleet of room hosts on Ray. The top
of the app; only the CLI and the page stand on it."""
