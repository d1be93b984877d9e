"""Webhook callbacks: fan changes out to the registered callbacks, deliver them signed, retry, give up."""
