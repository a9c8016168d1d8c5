"""The data every layer shares: facts, findings, typed values, errors. Imports only model/."""
