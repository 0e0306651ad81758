"""What the host is, read and never changed: the model's files and patches (facts), the service user and what it may
reach (service_user, unit_reach), the cold start's figures and records (coldstart, floor, starts), and doctor."""
