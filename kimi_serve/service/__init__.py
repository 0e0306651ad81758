"""The systemd service: unit rendering from the template, systemctl, on-disk state, install, restart with rollback,
status. Never imports kimi_serve.patches."""
