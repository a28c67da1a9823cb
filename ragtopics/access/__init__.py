"""Who may use the console: users, roles, sessions and API tokens."""
