"""tools: the read ratchet lint and its codemod."""
