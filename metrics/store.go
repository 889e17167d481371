package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierlog/tierlog/objstore"
)

// NewStore returns a collector for an objstore.Store: requests, errors
// and retries by operation (put, get, head, list, delete, abort_uploads),
// and bytes sent and received. Register one per store; to tell several
// stores apart, wrap the registerer (prometheus.WrapRegistererWith) with a
// label of your own. The store's name (its URL) is never exported.
func NewStore(s *objstore.Store) prometheus.Collector {
	const sub = "objstore"
	var (
		requests = desc(sub, "requests_total", "Requests sent to the object store, by operation (every attempt, retries included).", []string{"op"}, nil)
		errs     = desc(sub, "errors_total", "Operations that failed after their retries, by operation.", []string{"op"}, nil)
		retries  = desc(sub, "retries_total", "Attempts retried after a retryable error, by operation.", []string{"op"}, nil)
		bytes    = desc(sub, "bytes_total", "Bytes moved, by direction (in: read by GETs; out: sent by PUTs).", []string{"direction"}, nil)
	)
	ops := []objstore.Op{objstore.OpPut, objstore.OpGet, objstore.OpHead, objstore.OpList, objstore.OpDelete, objstore.OpAbort}
	return &collector{
		descs: []*prometheus.Desc{requests, errs, retries, bytes},
		collect: func(ch chan<- prometheus.Metric) {
			st := s.Stats()
			// Every known op, zeros included (a series that appears late
			// breaks rate()), then any op a newer driver added.
			seen := slices.Clone(ops)
			for op := range st.Requests {
				if !slices.Contains(seen, op) {
					seen = append(seen, op)
				}
			}
			for _, op := range seen {
				counter(ch, requests, float64(st.Requests[op]), string(op))
				counter(ch, errs, float64(st.Errors[op]), string(op))
				counter(ch, retries, float64(st.Retries[op]), string(op))
			}
			counter(ch, bytes, float64(st.BytesIn), "in")
			counter(ch, bytes, float64(st.BytesOut), "out")
		},
	}
}
