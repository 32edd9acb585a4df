class StreamingMelSpectrogram:
    pass
