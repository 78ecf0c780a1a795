"""Views: the terminal tables (:mod:`.terminal`), the plotly figures shared by the API and
the report (:mod:`.figures`) and the HTML report (:mod:`.report`)."""
