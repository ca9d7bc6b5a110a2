"""rnn gateware: the LSTM tile dispatcher engine."""
