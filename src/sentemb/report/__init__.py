"""Stage `compare`'s library: statistics over seeds and between methods (`stats`), the Markdown
summary (`markdown`), every PNG plot (`plots`) and `compare.compare`, which ties them together."""
