"""Pure-Python gNMI encoder: same functions as agent/_ext/encode.c (owned by the gNMI work)."""
