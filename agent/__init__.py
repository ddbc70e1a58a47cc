"""swtel: switch-side streaming telemetry agent."""

__version__ = "0.1.0"
