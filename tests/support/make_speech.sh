#!/usr/bin/env bash
# Real speech for the audio tests, with no network: Debian's espeak-ng speaks English sentences
# and sox converts them (apt-get install espeak-ng sox). The outputs are committed under
# tests/fixtures/speech/, so the tests need neither tool; rerun this only to change them.
set -euo pipefail
out="$(dirname "$0")/../fixtures/speech"
mkdir -p "$out"
say() { espeak-ng -v "$1" -s "$2" -w "$3" "$4"; }
# 22,050 Hz mono int16, as espeak-ng writes it (the loader resamples it to 16 kHz)
say en-us 160 "$out/cat.wav" "The cat sat on the mat."
say en 150 "$out/fox.wav" "The quick brown fox jumps over the lazy dog."
# 16 kHz versions, stereo with a quieter right channel for the down-mix, and 8 kHz for upsampling
sox "$out/fox.wav" -r 16000 "$out/fox_16k.wav"
sox "$out/cat.wav" -r 16000 "$out/cat_16k.wav"
sox -M "$out/fox_16k.wav" -v 0.5 "$out/fox_16k.wav" "$out/fox_16k_stereo.wav"
sox "$out/cat.wav" -r 8000 "$out/cat_8k.wav"
# Past 60 s at 16 kHz, FLAC: several sentences read one after another (long-form transcription)
tmp=$(mktemp -d)
i=0
while read -r line; do
  say en-us 150 "$tmp/$i.wav" "$line"; i=$((i + 1))
done <<'TEXT'
It was a bright cold day in April, and the clocks were striking thirteen.
Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, I thought I would sail about a little and see the watery part of the world.
It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.
All happy families are alike; each unhappy family is unhappy in its own way.
In a hole in the ground there lived a hobbit. Not a nasty, dirty, wet hole, filled with the ends of worms and an oozy smell.
The sky above the port was the color of television, tuned to a dead channel.
Happy families are all alike, but the weather in the mountains changes every hour, and travellers learn to carry a coat.
The train left the station at noon, and by evening the passengers could see the lights of the city across the river.
Far out in the uncharted backwaters of the unfashionable end of the western spiral arm of the galaxy lies a small unregarded yellow sun.
TEXT
sox $(ls "$tmp"/*.wav | sort -V) -r 16000 "$out/long.flac"
rm -r "$tmp"
soxi -D "$out/long.flac"
