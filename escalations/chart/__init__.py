"""The status-request chart of the operation page, computed on the server (no JavaScript).

x is time, y the running count of status requests. Each request is a mark whose colour AND shape
say why it was sent at that moment (the delay source of the wait before it; a request right after
a human's extension is `manual_extension`). The request budget of each authorization is a step
line; the deadline, earlier deadlines, the business deadline, extensions and "now" are vertical
lines with text labels, packed in rows above the plot so that no two overlap, each joined to its
line. The time axis (`time_axis`) fits the requests and the nearest deadline; a deadline far
beyond them is an arrow at the right edge with its time. Labels carry their time as data, so the
browser can show it in the viewer's zone. Pure: the caller passes rows and `now`; the SVG is
built here.

The pieces: `model` (what a chart is: marks, lines, ticks; the delay sources and their shapes),
`axis` (the time range and its ticks), `labels` (label widths and packing in rows), `requests`
(`request_chart`: rows in, a Chart out, from `rows`, what it reads of them, `scale`, where a moment
and a count fall, `annotations`, the vertical lines and edge markers, `marks`, a mark per request
and the planned ones, and `budget`, the step line) and `svg` (`render_svg`: a Chart in, the SVG out).
"""
