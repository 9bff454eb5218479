"""What every layer of the app stands on: settings, the encrypted meeting store, the audit log, metrics, cost,
canaries, the embedded models and the Ray cluster. Imports nothing else of app."""
