"""What every view shares: numbers, sizes and durations for people; the pictures."""
