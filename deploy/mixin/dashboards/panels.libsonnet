// Plain functions that make Grafana panels (schemaVersion 39), so the dashboard
// reads as a list of what each panel shows. No grafonnet: these few are all it uses.
local datasource = { type: 'prometheus', uid: '${datasource}' };

{
  // One query. `expr` may use %(sel)s: the namespace and pod variables' matchers.
  target(expr, legend=null):: {
    datasource: datasource,
    expr: expr % { sel: 'namespace=~"$namespace", pod=~"$pod"' },
    range: true,
  } + (if legend == null then {} else { legendFormat: legend }),

  // `zero`: an error or failure panel. Its queries end in `or on () vector(0)`, and
  // Grafana shows 0, not "No data", when nothing happened (or nothing was scraped yet).
  local base(type, title, unit, targets, description, w, h, zero) = {
    type: type,
    title: title,
    description: description,
    datasource: datasource,
    gridPos: { w: w, h: h },
    fieldConfig: {
      defaults: { unit: unit } + (if zero then { noValue: '0' } else {}),
      overrides: [],
    },
    targets: [
      targets[i] { refId: std.char(std.codepoint('A') + i) }
      for i in std.range(0, std.length(targets) - 1)
    ],
  },

  stat(title, unit, targets, description, w=4, h=4, warnAt=null, zero=false)::
    base('stat', title, unit, targets, description, w, h, zero) {
      fieldConfig+: {
        defaults+: {
          thresholds: {
            mode: 'absolute',
            steps: [{ color: 'green', value: null }]
                   + (if warnAt == null then [] else [{ color: 'orange', value: warnAt }]),
          },
          color: { mode: 'thresholds' },
        },
      },
      options: {
        reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
        colorMode: 'value',
        graphMode: 'area',
        justifyMode: 'auto',
        orientation: 'auto',
        textMode: 'auto',
      },
    },

  timeseries(title, unit, targets, description, w=8, h=8, stack=false, zero=false)::
    base('timeseries', title, unit, targets, description, w, h, zero) {
      fieldConfig+: {
        defaults+: {
          custom: {
            drawStyle: 'line',
            lineWidth: 1,
            fillOpacity: 10,
            showPoints: 'never',
            spanNulls: false,
            stacking: { mode: if stack then 'normal' else 'none', group: 'A' },
          },
          color: { mode: 'palette-classic' },
          min: 0,
        },
      },
      options: {
        legend: { displayMode: 'list', placement: 'bottom', showLegend: true },
        tooltip: { mode: 'multi', sort: 'desc' },
      },
    },

  row(title, panels):: { title: title, panels: panels },

  // The rows laid out top to bottom, each row's panels left to right, a new line when
  // the next would pass the 24 columns; ids in that order from 1.
  layout(rows)::
    local items = std.flattenArrays([
      [{ type: 'row', title: r.title, collapsed: false, panels: [], gridPos: { w: 24, h: 1 } }] + r.panels
      for r in rows
    ]);
    local place(state, p) =
      local wrap = p.type == 'row' || state.x + p.gridPos.w > 24;
      local y = if wrap then state.y + state.h else state.y;
      local x = if wrap then 0 else state.x;
      local placed = p { id: std.length(state.out) + 1, gridPos+: { x: x, y: y } };
      if p.type == 'row' then
        { x: 0, y: y + 1, h: 0, out: state.out + [placed] }
      else
        { x: x + p.gridPos.w, y: y, h: std.max(if wrap then 0 else state.h, p.gridPos.h), out: state.out + [placed] };
    std.foldl(place, items, { x: 0, y: 0, h: 0, out: [] }).out,
}
