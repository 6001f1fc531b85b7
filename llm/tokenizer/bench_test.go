package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTime is this process's user+system CPU time. On a shared machine wall
// time measures the neighbours; the MB/cpu-s metric is comparable with the
// Python side's process_time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchText is testdata/tokenizers/corpus.txt repeated to about 1 MB. The
// Python side of the comparison is
// `scripts/gen-tokenizer-fixtures.py llm/tokenizer/testdata/tokenizers bench`.
func benchText(b *testing.B) []string {
	raw, err := os.ReadFile(filepath.Join("testdata", "tokenizers", "corpus.txt"))
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat(string(raw)+"\n", (1<<20)/len(raw)+1)
	return strings.Split(text, "\n")
}

// BenchmarkEncode encodes the corpus line by line; MB/s is of input text.
func BenchmarkEncode(b *testing.B) {
	lines := benchText(b)
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	for _, fam := range families {
		b.Run(fam, func(b *testing.B) {
			tok, _ := load(b, fam)
			b.SetBytes(int64(n))
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				for _, l := range lines {
					if _, err := tok.Encode(l, false); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/(cpuTime()-c0).Seconds()/1e6, "MB/cpu-s")
		})
	}
}

// BenchmarkDecodeStream decodes the corpus's ids one at a time.
func BenchmarkDecodeStream(b *testing.B) {
	lines := benchText(b)
	for _, fam := range []string{"llama3", "llama2"} {
		b.Run(fam, func(b *testing.B) {
			tok, _ := load(b, fam)
			var ids []int
			n := 0
			for _, l := range lines {
				x, _ := tok.Encode(l+"\n", false)
				ids = append(ids, x...)
				n += len(l) + 1
			}
			b.SetBytes(int64(n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d := tok.NewDecoder(true)
				for _, id := range ids {
					d.Add(id)
				}
				d.Flush()
			}
		})
	}
}
