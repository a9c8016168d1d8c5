"""PD2xx: precision: weights' dtype against AMP and its scaler, optimizer state, autocast, library keywords and
defaults."""
