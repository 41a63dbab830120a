"""Audio tasks: speech recognition, audio classification, zero-shot audio, speech synthesis."""
