"""Unit tests: pure logic, fakes at the boundaries, no real server (tests/integration/ has those)."""
