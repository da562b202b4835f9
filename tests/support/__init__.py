"""Helpers shared by the tests (no tests here): the servers, the raw JSON-RPC
client, HTTP helpers, sandbox and proxy fixtures."""
