"""Releasing a build to the Hub: branch vN, tag vX.Y.Z, the repo card."""
